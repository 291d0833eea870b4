# vsockdiag.nomad.hcl: the vsockdiag collector on every Firecracker client node, as a Nomad
# system job (README, "Deploying the collector"). vsockdiag is installed on the node image with
# `npm install -g ./vsockdiag-<version>.tgz` (make dist); the job only runs it.
#
#   nomad var put nomad/jobs/vsockdiag token="$(head -c 32 /dev/urandom | base64)"
#   nomad job run deploy/host/nomad/vsockdiag.nomad.hcl
#
# raw_exec (enable it in the client's plugin "raw_exec" block): the collector creates
# <uds_path>_52000 beside each Firecracker socket that --discover matches, in the host's
# folders, which an isolating driver would hide. Settings: a flag in args, or its VSOCKDIAG_*
# variable in env (--stall-after: VSOCKDIAG_STALL_AFTER); a flag beats its variable.

job "vsockdiag" {
  type     = "system"
  priority = 80

  group "collector" {
    network {
      port "http" {
        static = 7070
      }
    }

    service {
      provider = "nomad"
      name     = "vsockdiag"
      port     = "http"
      tags     = ["metrics"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "collector" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/vsockdiag"
        # The API listens on the node's address: a token is required, read from the task's
        # private secrets folder, never given on the command line.
        args = [
          "collector",
          "--http", "${NOMAD_ADDR_http}",
          "--discover", "/run/fc/*/v.sock",
          "--token-file", "${NOMAD_SECRETS_DIR}/token",
        ]
      }

      env {
        # The SQLite history outlives the allocation: a host folder, not the alloc dir.
        VSOCKDIAG_DATA      = "/var/lib/vsockdiag"
        VSOCKDIAG_LOG_LEVEL = "info"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/vsockdiag\" }}{{ .token }}{{ end }}"
        destination = "${NOMAD_SECRETS_DIR}/token"
        perms       = "0400"
        change_mode = "restart"
      }

      # NDJSON log records on stderr, the start-up line on stdout.
      logs {
        max_files     = 5
        max_file_size = 20
      }

      kill_timeout = "15s"

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
