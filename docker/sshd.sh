#!/usr/bin/env bash
# An ssh server in a container, run as its non-root user, for HOSTS= runs between containers: the launcher in one
# container reaches the others over ssh (launcher/starters/ssh.py), as between machines.
#
#   sshd.sh [AUTHORIZED_KEYS]      default /work/.ssh/authorized_keys, in the shared volume
#
# A non-root sshd can only log its own user in, which is all a HOSTS= run needs; it listens on 2222 (no
# privileged port), with a host key made when the container starts (never one baked into the image).
set -euo pipefail
dir=$HOME/.sshd
mkdir -p "$dir"
[ -f "$dir/host_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
cat > "$dir/sshd_config" <<CONFIG
Port 2222
HostKey $dir/host_key
PidFile $dir/sshd.pid
AuthorizedKeysFile ${1:-/work/.ssh/authorized_keys}
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The shared volume's modes are not sshd's business in a private cluster of containers.
StrictModes no
CONFIG
exec /usr/sbin/sshd -D -e -f "$dir/sshd_config"
