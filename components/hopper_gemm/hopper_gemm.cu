// Hopper GEMM mainloop, D[M, N] = A[M, K] * B[N, K]^T in fp32 from bf16 (a torch Linear: x @ W^T).
//
// Built from CUTLASS's sm90 warp-specialized collective (TMA loads, wgmma, an mbarrier pipeline)
// as three entries the linker's glue calls: `init` on every thread, then `load` on the producer
// warpgroup and `mma` on the consumer warpgroups, once per output tile of this CTA. The
// accumulator tile stays in the consumer's registers (port `acc`) for whichever epilogue the
// link puts after it. One source, several contracts: each contract fixes the tile shape, the consumer
// warpgroups per tile (MMA_WARPGROUPS) and how many consumer instances take tiles in turn.
#define NDEBUG  // CUTLASS's pipelines carry `brkpt` debug checks otherwise
#include PIPELINK_HEADER
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

using namespace cute;
namespace self = pl_component;

using Element = cutlass::bfloat16_t;
using TileShape = Shape<Int<self::TILE_M>, Int<self::TILE_N>, Int<self::TILE_K>>;
// Two consumer warpgroups split one tile (cooperative), or one warpgroup computes a whole tile (a
// contract may run that role twice, the instances taking alternate tiles: ping-pong).
using Schedule = cute::conditional_t<(self::MMA_WARPGROUPS == 2), cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                     cutlass::gemm::KernelTmaWarpSpecialized>;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, cutlass::layout::RowMajor, 8,      // A: M x K, K contiguous
    Element, cutlass::layout::ColumnMajor, 8,   // B: N x K, K contiguous
    float, TileShape, Shape<_1, _1, _1>,
    cutlass::gemm::collective::StageCount<self::STAGES>, Schedule>::CollectiveOp;
using Pipeline = typename Mainloop::MainloopPipeline;
using PipelineState = typename Mainloop::PipelineState;

static_assert(sizeof(typename Mainloop::TensorStorage) == self::smem_tensors_bytes,
              "the contract's `tensors` buffer must hold CUTLASS's tensor storage exactly");
static_assert(sizeof(typename Pipeline::SharedStorage) <= self::smem_pipeline_bytes,
              "the contract's `pipeline` buffer must hold the pipeline's mbarriers");
static_assert(self::smem_tensors_align >= 1024, "128B-swizzled TMA tiles need 1024-byte aligned shared memory");
static_assert(size(typename Mainloop::TiledMma{}) == self::CONSUMER_WARPS * 32, "one consumer thread per MMA thread");

constexpr int kConsumerThreads = self::CONSUMER_WARPS * 32;
constexpr uint32_t kStageBytes = (self::TILE_M + self::TILE_N) * self::TILE_K * sizeof(Element);

__device__ __forceinline__ typename Pipeline::SharedStorage& pipeline_storage() {
  return *self::smem_pipeline<typename Pipeline::SharedStorage>();
}

__device__ __forceinline__ typename Pipeline::Params pipeline_params(typename Pipeline::ThreadCategory role,
                                                                     bool leader) {
  typename Pipeline::Params p;
  p.transaction_bytes = kStageBytes;
  p.role = role;
  p.is_leader = leader;
  p.num_consumers = kConsumerThreads;
  p.initializing_warp = self::warp_begin();
  return p;
}

// The contract declares the k-blocks a reduction (tile_sequence.reduction): each call covers the
// tile's k-blocks [tile.k_begin, tile.k_end), a whole tile or a piece the link split over CTAs, and
// tile.k_first, the k-blocks this CTA walked before, is the stage ring's position (no state kept
// across calls).

extern "C" __device__ void hgemm_init(const pl::TensorMap* a, const pl::TensorMap* b) {
  Pipeline::init_barriers(pipeline_storage(), pipeline_params(Pipeline::ThreadCategory::NonParticipant, false),
                          Shape<_1, _1, _1>{});
  if (self::warp_rank() == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(a));
    cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(b));
  }
}

extern "C" __device__ void hgemm_load(pl::Tile tile, const pl::TensorMap* a, const pl::TensorMap* b, int K) {
  // One thread of the producer warpgroup issues every copy; the others have nothing to do. A fixed
  // lane, not elect.sync: this entry runs once per tile, and the other lanes are a tile ahead by
  // then, so a warp-collective election here would wait on a diverged warp.
  if (pl::warp_index() != self::producer_warp_begin() || pl::lane_index() != 0) return;
  Pipeline pipeline(pipeline_storage(), pipeline_params(Pipeline::ThreadCategory::Producer, true),
                    Shape<_1, _1, _1>{}, cute::false_type{});
  auto& tensors = *self::smem_tensors<typename Mainloop::TensorStorage>();
  const int first = tile.k_first;
  // A producer starts one phase ahead: its first pass over the stages finds them free.
  PipelineState state(first % self::STAGES, ((first / self::STAGES) & 1) ^ 1, first);
  const int m0 = tile.coord[0] * self::TILE_M, n0 = tile.coord[1] * self::TILE_N;
  const uint64_t keep = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  for (int k = tile.k_begin; k < tile.k_end; ++k) {
    pipeline.producer_acquire(state);
    uint64_t* full = pipeline.producer_get_barrier(state);
    const int s = state.index();
    cute::SM90_TMA_LOAD_2D::copy(a, full, keep, tensors.smem_A.data() + s * self::TILE_M * self::TILE_K,
                                 k * self::TILE_K, m0);
    cute::SM90_TMA_LOAD_2D::copy(b, full, keep, tensors.smem_B.data() + s * self::TILE_N * self::TILE_K,
                                 k * self::TILE_K, n0);
    ++state;
  }
}

extern "C" __device__ void hgemm_mma(pl::Tile tile, float* acc, int K) {
  Pipeline pipeline(pipeline_storage(), pipeline_params(Pipeline::ThreadCategory::Consumer, false),
                    Shape<_1, _1, _1>{}, cute::false_type{});
  const int k_tiles = tile.k_end - tile.k_begin;
  const int first = tile.k_first;
  PipelineState state(first % self::STAGES, (first / self::STAGES) & 1, first);
  typename Mainloop::TiledMma mma;
  auto frag = partition_fragment_C(mma, take<0, 2>(TileShape{}));
  static_assert(decltype(size(frag))::value == self::port_acc_elements, "fragment size per thread");
  Tensor accum = make_tensor(make_rmem_ptr<float>(acc), frag.layout());
  Mainloop mainloop;
  typename Mainloop::Params unused{};  // mma() reads shared memory only; its Params hold the TMA descriptors
  const int thread = threadIdx.x - 32 * self::consumer_warp_begin();  // in this instance of the role
  mainloop.mma(pipeline, state, accum, k_tiles, thread, *self::smem_tensors<typename Mainloop::TensorStorage>(), unused);
  mainloop.mma_tail(pipeline, state, k_tiles);
}
