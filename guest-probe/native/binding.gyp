{
  # vsockdiag: the probe's small N-API addon (C only).
  # Build: cd guest-probe/native && npm_config_nodedir=/usr node ../node_modules/node-gyp/bin/node-gyp.js rebuild
  "targets": [
    {
      "target_name": "vsockdiag",
      "sources": ["src/addon.c", "src/notify.c", "src/vsock.c", "src/diag.c", "src/checksum.c", "src/random.c", "src/memread.c", "src/uevent.c", "src/source.c"],
      "defines": ["NAPI_VERSION=8", "_GNU_SOURCE"],
      "cflags": ["-Wall", "-Wextra"],
      "cflags_c": ["-std=gnu11"],
      "configurations": {
        "Release": {
          # common.gypi puts -O3 into Release; we want -O2.
          "cflags!": ["-O3"],
          "cflags": ["-O2"]
        }
      }
    }
  ]
}
