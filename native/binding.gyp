{ "targets": [
  { "target_name": "so_original_dst", "sources": ["so_original_dst.c"] },
  { "target_name": "gc_pauses", "sources": ["gc_pauses.cc"] },
  { "target_name": "malloc_trim", "sources": ["malloc_trim.c"] }
] }
