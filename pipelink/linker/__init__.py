"""The link: its passes over one context (`passes`: `link`, `run_passes`, `LinkOptions`) and what they
decide and generate. Read (`collect`), probe (`conformance`), resolve (`resolve`, `roles`, `events`,
`graph`), allocate (`allocate`), generate (`glue`, `event_glue`, `monolithic`), verify (`verify`), emit
(`emit`, `picture`), and the link cache (`cache`). Imports every layer below the API but the harness.
"""
from .passes import OPTIONAL, PASSES, LinkContext, LinkOptions, LinkResult, link, run_passes

__all__ = ["LinkOptions", "LinkResult", "LinkContext", "link", "run_passes", "PASSES", "OPTIONAL"]
