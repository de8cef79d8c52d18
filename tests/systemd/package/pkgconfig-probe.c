/* Built inside the harness against the INSTALLED package only: cc probe.c $(pkg-config --cflags --libs
 * fastrestart-engine-loader). Publishes one tensor to the weight daemon of the running fastrestart@demo
 * (host backend, /run/fastrestart) under a key of its own, attaches to it and checks the bytes: the installed
 * header, shared library and daemon work together. Usage: probe CHECKPOINT_FILE. Exit 0 on success. */
#include <stdio.h>
#include <string.h>

#include <fastrestart/engine_loader_c.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* files[] = {argv[1]};
  const char* config[] = {"arch=pkgconfig-probe", "dtype=F32"};
  float data[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  int64_t shape[1] = {4};
  fr_tensor_t t = {"probe.weight", "F32", 1, shape, NULL, data, sizeof data};
  fr_options_t o;
  fr_options_init(&o);
  o.mode = FR_MODE_COPY;
  o.fallback = 0;
  o.socket_dir = "/run/fastrestart";
  char err[512] = "";
  fr_key_t* key = NULL;
  int rc = fr_key_identify(files, 1, config, 2, &key, err, sizeof err);
  if (rc != FR_OK) {
    fprintf(stderr, "identify: rc %d: %s\n", rc, err);
    return 1;
  }
  rc = fr_publish_key(key, &t, 1, &o, err, sizeof err);
  fr_key_release(key);
  if (rc != FR_OK) {
    fprintf(stderr, "publish: rc %d: %s\n", rc, err);
    return 1;
  }
  fr_weights_t* w = NULL;
  rc = fr_attach(files, 1, config, 2, &o, &w, err, sizeof err);
  if (rc != FR_OK || w == NULL) {
    fprintf(stderr, "attach after publish: rc %d: %s\n", rc, err);
    return 1;
  }
  fr_tensor_t got;
  if (fr_weights_count(w) != 1 || fr_weights_tensor(w, 0, &got) != FR_OK || strcmp(got.name, "probe.weight") != 0 ||
      got.nbytes != sizeof data || memcmp(got.data, data, sizeof data) != 0) {
    fprintf(stderr, "attach returned other weights (%zu tensors)\n", fr_weights_count(w));
    fr_weights_release(w);
    return 1;
  }
  printf("published and attached 1 tensor through the installed library, digest %s\n", fr_weights_digest(w));
  fr_weights_release(w);
  return 0;
}
