/*
 * trim() -> boolean: gives the C heap's free memory back to the system (glibc's malloc_trim(0),
 * which also releases free pages in the middle of the heap, not only at its top). After an
 * attack's connections close, their TLS and socket memory is free but stays resident in glibc's
 * arenas; a V8 collection cannot reach it. Returns whether any memory was released; false (and
 * nothing done) on a C library without malloc_trim. N-API only: one build for every Node.
 */
#define NAPI_VERSION 8
#include <node_api.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  int released = 0;
#ifdef __GLIBC__
  released = malloc_trim(0);
#endif
  napi_value out;
  napi_get_boolean(env, released != 0, &out);
  return out;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "trim", NAPI_AUTO_LENGTH, trim, NULL, &fn);
  napi_set_named_property(env, exports, "trim", fn);
  return exports;
}
