#!/bin/sh
# Spark's GPU discovery script for geneva_provider.stages.local_session(gpus=N): prints the GPUs of
# this machine as Spark wants them, {"name": "gpu", "addresses": ["0", "1"]}.
# GENEVA_FAKE_GPUS="0,1" names the addresses instead (tests on machines without a GPU, or to give
# Spark only some GPUs); otherwise nvidia-smi lists them; with neither, no address.
if [ -n "${GENEVA_FAKE_GPUS:-}" ]; then
  addrs="$GENEVA_FAKE_GPUS"
elif command -v nvidia-smi >/dev/null 2>&1; then
  addrs=$(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ' | paste -sd, -)
else
  addrs=""
fi
quoted=$(printf '%s' "$addrs" | tr -d ' ' | sed -E 's/([^,]+)/"\1"/g')
printf '{"name": "gpu", "addresses": [%s]}\n' "$quoted"
