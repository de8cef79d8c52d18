/* The C ABI compiled as C and linked against the shared library: with no daemon, attach is a miss with a
 * reason under fallback and an error without it; outside a standby the standby gate passes. Exit 0 on
 * success. */
#include <stdio.h>
#include <string.h>

#include "fastrestart/engine_loader_c.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* files[] = {argv[1]};
  const char* config[] = {"arch=c"};
  fr_options_t o;
  fr_options_init(&o);
  o.socket_dir = "/nonexistent/fastrestart";
  o.connect_timeout_s = 0.1;
  fr_weights_t* w = NULL;
  char err[256];
  int rc = fr_attach(files, 1, config, 1, &o, &w, err, sizeof err);
  if (rc != FR_MISS || w != NULL || strstr(err, "no daemon") == NULL) {
    fprintf(stderr, "fallback attach: rc %d, err '%s'\n", rc, err);
    return 1;
  }
  o.fallback = 0;
  rc = fr_attach(files, 1, config, 1, &o, &w, err, sizeof err);
  if (rc >= 0) {
    fprintf(stderr, "strict attach should fail: rc %d\n", rc);
    return 1;
  }
  char gate_err[256] = "";
  if (fr_is_standby() != 0 || fr_standby_gate("pre_gpu", gate_err, sizeof gate_err) != FR_STANDBY_PASSED) {
    fprintf(stderr, "standby gate outside a standby should pass: %s\n", gate_err);
    return 1;
  }
  printf("ok: %s\n", err);
  return 0;
}
