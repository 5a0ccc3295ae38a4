"""The drop-in's classes for SGLang 0.5.23's module layout (docs/SGLANG.md, "SGLang 0.5.23").

SGLang 0.5.23 lays each sub-pool out token-major (one entry per token slot holding every
layer, ``page_size`` entries per page) and reports relocations as whole physical pages
(``move_physical_pages``). ukv's core only needs each sub-pool's page envelope (its byte
size and place); so here every sub-pool is an *envelope* in ukv's pool (``specs``), the
views are SGLang's token-major ones over ukv's buffer (``pool``), and the allocators,
composites and factories reuse the 0.5.16 drop-in's classes where the contract is the
same. ``layouts`` serves these modules when SGLang 0.5.23 is installed.
"""
