/*
 * getOriginalDst(fd) -> [address, port]: the destination a connection had before iptables
 * REDIRECT/DNAT rewrote it (Linux netfilter SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST). Throws an
 * Error whose `code` is the errno name (ENOENT: the connection has no NAT entry). Only
 * node_api.h: no node-addon-api, no other dependency. See src/proxy/original-dst.ts.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <node_api.h>

/* From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, whose includes clash with netinet/in.h. */
#define SO_ORIGINAL_DST 80
#define IP6T_SO_ORIGINAL_DST 80

static napi_value fail(napi_env env, int err, const char *what) {
  const char *code = strerrorname_np(err);
  char msg[128];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, code != NULL ? code : "EUNKNOWN", msg);
  return NULL;
}

static napi_value get_original_dst(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result, address, port;
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", "getOriginalDst(fd): fd must be a number");
    return NULL;
  }
  struct sockaddr_storage local, dst;
  socklen_t len = sizeof local;
  if (getsockname(fd, (struct sockaddr *)&local, &len) != 0) return fail(env, errno, "getsockname");
  len = sizeof dst;
  int rc = -1;
  if (local.ss_family == AF_INET6) rc = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &len);
  /* IPv4 sockets, and IPv4 connections on a dual-stack socket (tracked by the IPv4 table). */
  if (local.ss_family == AF_INET || (rc != 0 && IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&local)->sin6_addr))) {
    len = sizeof dst;
    rc = getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &len);
  }
  if (rc != 0) return fail(env, errno, "getsockopt(SO_ORIGINAL_DST)");
  char text[INET6_ADDRSTRLEN];
  uint16_t p;
  if (dst.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&dst;
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    p = ntohs(a->sin_port);
  } else {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&dst;
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    p = ntohs(a->sin6_port);
  }
  napi_create_array_with_length(env, 2, &result);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &address);
  napi_create_uint32(env, p, &port);
  napi_set_element(env, result, 0, address);
  napi_set_element(env, result, 1, port);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "getOriginalDst", NAPI_AUTO_LENGTH, get_original_dst, NULL, &fn);
  napi_set_named_property(env, exports, "getOriginalDst", fn);
  return exports;
}
