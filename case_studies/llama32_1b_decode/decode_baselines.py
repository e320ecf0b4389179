"""The reference decode step (Hugging Face transformers, StaticCache): eager, and one step captured into a CUDA
graph. torch and transformers are imported inside functions."""
from __future__ import annotations

import inspect


def make_static_cache(model, B: int, Lmax: int):
    """A StaticCache of batch B and capacity Lmax, whatever the transformers version calls its arguments."""
    from transformers import StaticCache
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": model.config, "max_cache_len": Lmax}
    for name, value in (("max_batch_size", B), ("batch_size", B), ("device", model.device),
                        ("dtype", model.dtype)):  # the model's: bf16, or fp32 for the fp32 reference
        if name in params:
            kw[name] = value
    return StaticCache(**kw)


def cache_tensors(cache) -> list:
    """[(keys, values)] per layer of a StaticCache ([B, kv heads, Lmax, head dim] each), either API."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def write_counters(cache) -> list:
    """The per-layer write positions of a StaticCache that keeps its own (transformers 5: each layer's
    `cumulative_length`, a 0-d tensor that every update advances and writes at, whatever `cache_position` says);
    [] where the cache writes at `cache_position` (transformers 4). Read them anew each time: a layer replaces its
    tensor by a device copy at its first update."""
    return [layer.cumulative_length for layer in getattr(cache, "layers", [])
            if getattr(layer, "cumulative_length", None) is not None]


class HFStep:
    """One decode step of the reference: `step()` runs the model on `ids` [B, 1] at `cache_pos` [1] and leaves
    the last logits in `self.logits` [B, V]. The inputs are static tensors, so a CUDA graph may capture it.

    A step writes its keys and values at `pos` every time it runs (as a pipelink step does): where the cache
    advances a write counter of its own in every update, the step moves it back by one afterwards (one foreach
    kernel, also in the graph). Without that, repeated steps (warm-up, timing, graph replays) wrote at pos, pos + 1,
    ... and past the cache's end: index_copy_'s device assert."""

    def __init__(self, model, B: int, Lmax: int):
        import torch
        self.model, self.B, self.Lmax = model, B, Lmax
        dev = model.device
        self.cache = make_static_cache(model, B, Lmax)
        self.ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.cache_pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.position_ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.logits = None
        self.graph = None

    def set(self, tokens, pos: int) -> None:
        """The next input tokens (a list or a tensor of B) at position pos."""
        import torch
        self.ids.copy_(torch.as_tensor(tokens, device=self.ids.device).view(self.B, 1))
        self.cache_pos.fill_(pos)
        self.position_ids.fill_(pos)
        for counter in write_counters(self.cache):
            counter.fill_(pos)

    def step(self):
        import torch
        with torch.no_grad():
            out = self.model(input_ids=self.ids, position_ids=self.position_ids, cache_position=self.cache_pos,
                             past_key_values=self.cache, use_cache=True)
            self._rewind()
        self.logits = out.logits[:, -1, :]
        return self.logits

    def _rewind(self) -> None:
        """Undo the step's advance of the cache's write counters (see the class)."""
        import torch
        counters = write_counters(self.cache)
        if counters:
            torch._foreach_sub_(counters, 1)

    def fill_cache_random(self, seed: int = 1) -> None:
        """Random keys and values in every slot (the cache's tensors exist after a first step)."""
        import torch
        g = torch.Generator(device=self.ids.device).manual_seed(seed)
        for k, v in cache_tensors(self.cache):
            k.normal_(generator=g)
            v.normal_(generator=g)

    def capture(self, warmup: int = 3) -> None:
        """Capture one step into a CUDA graph (after eager warm-up steps on a side stream)."""
        import torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            out = self.model(input_ids=self.ids, position_ids=self.position_ids, cache_position=self.cache_pos,
                             past_key_values=self.cache, use_cache=True)
            self._rewind()
            self.graph_logits = out.logits[:, -1, :]

    def replay(self):
        self.graph.replay()
        return self.graph_logits

    def step_fn(self):
        """`step` as a timed function of a stream (run.py's timing loop runs on the current stream)."""
        return lambda stream: self.step()

    def replay_fn(self):
        return lambda stream: self.replay()
