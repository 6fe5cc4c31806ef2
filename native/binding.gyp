{ "targets": [{ "target_name": "so_original_dst", "sources": ["so_original_dst.c"] }] }
