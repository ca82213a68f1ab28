#!/usr/bin/env bash
# Installs what xdpdrop's build, tests and demo need on a fresh Debian
# (bookworm) machine, and mounts bpffs. Safe to run again: it installs only
# what is missing. Needs root.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (apt-get and mount need it): sudo $0" >&2
	exit 1
fi

# clang-19/llvm-19 build the BPF objects (make generate, check-generate);
# bpftool, iproute2 and ethtool are for inspecting by hand and the tests'
# helpers; linux-libc-dev and libbpf-dev provide the headers the C includes;
# tcpdump makes and reads the real captures `xdpdrop test` is tested with,
# and reads back the pcapng that `xdpdrop capture` writes.
pkgs=(clang-19 llvm-19 bpftool libbpf-dev linux-libc-dev iproute2 ethtool tcpdump)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bpffs is not mounted on a fresh machine; pins need it.
if ! stat -f -c %T /sys/fs/bpf 2>/dev/null | grep -q bpf_fs; then
	mkdir -p /sys/fs/bpf
	mount -t bpf bpf /sys/fs/bpf
	echo "setup: mounted bpffs at /sys/fs/bpf"
fi

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	echo "setup: note: go is at /usr/local/go/bin; add it to PATH" >&2
fi
