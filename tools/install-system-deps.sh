#!/usr/bin/env bash
# The Debian packages the sandbox needs: bubblewrap (the sandbox), slirp4netns + nftables + iproute2
# (the "outbound" network policy), util-linux (setpriv, prlimit, nsenter, unshare) and, for the
# tests, busybox-static (a tiny image). Installed only where missing and only when we can (root
# with apt); otherwise the server says what it lacks and falls back as documented.
# Extra command:package pairs may follow (`make bench` adds wrk:wrk); /a/file:package checks for a file.
set -u
need=()
# e2fsprogs + mount (losetup): each workspace's own file system, the kernel's disk limit (danlu.compute.sandbox.volume).
# restic: snapshots of workspaces (danlu.compute.snapshots). openssh-sftp-server: the SSH gateway runs sftp-server inside a rental's sandbox (the host image's).
for pair in bwrap:bubblewrap slirp4netns:slirp4netns nft:nftables ip:iproute2 setpriv:util-linux keyctl:keyutils busybox:busybox-static restic:restic \
  mkfs.ext4:e2fsprogs resize2fs:e2fsprogs losetup:mount \
  /usr/lib/openssh/sftp-server:openssh-sftp-server "$@"; do
  what="${pair%%:*}"
  if [[ "$what" == /* ]]; then [ -e "$what" ] || need+=("${pair#*:}")   # a file the package installs (a font)
  else command -v "$what" >/dev/null 2>&1 || need+=("${pair#*:}"); fi
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: missing ${need[*]} (install them as root: apt-get install ${need[*]}); the sandbox may be limited or unavailable" >&2
  exit 0
fi
echo "installing ${need[*]} (Debian packages) ..."
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "${need[@]}" >/dev/null; } \
  || echo "note: could not install ${need[*]}; the sandbox may be limited or unavailable" >&2
