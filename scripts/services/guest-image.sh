#!/usr/bin/env bash
# The default guest image for the QEMU provisioner and its tests, from Debian bookworm
# packages only (no download of an image): the kernel of linux-image-cloud-amd64 and an
# initramfs of busybox-static whose /init prints `GUEST-READY <kernel> <uptime>` on the
# serial console, then `GUEST-TICK <uptime>` every second (so a test can see that a
# migrated guest did not reboot), until it is powered down.
#
# Before GUEST-READY, /init loads the kernel's virtio modules (virtio_console and what it
# needs; modules of the cloud kernel, copied into the initramfs) and starts the guest
# agent /bin/drover-agent on the virtio-serial port named org.drover.agent (console:
# `GUEST-AGENT /dev/vportNpM`, or `GUEST-AGENT none`). The agent runs the host's commands
# (Provisioner::run_in_guest), one at a time, as root in the guest. Protocol, framed by
# lengths so that no output byte is taken for framing (crates/cloud/src/provision/agent.rs):
#   host:  DROVER-RUN <hex nonce> <script_len> <env_len> <stdin_len> <secs>\n
#          then the script, the environment (`export NAME='value'` lines) and the input, raw
#   guest: DROVER-DONE <nonce> <exit> <timed_out> <out_len> <out_cut> <err_len> <err_cut>\n
#          then out_len bytes of stdout, err_len bytes of stderr, then DROVER-END <nonce>\n
# The script runs as `sh -c` in /, in a session of its own, killed (SIGKILL, with all it
# started) after <secs> (then timed_out is 1) and when it ends; each output keeps its
# first 1 MiB (the rest is drained and dropped, *_cut 1). With no host on the port's
# socket the agent polls every 0.2 s.
#
# Usage (as root):  scripts/services/guest-image.sh [install|packages|account|image|dir]...
#                   (default: install image)
#   install  the account step, then the packages step
#   packages apt-get install qemu-system-x86, qemu-utils (pinned to qemu-system-x86's
#            version), busybox-static, linux-image-cloud-amd64, cpio, if any is missing
#   account  make the system account guests run as ($GUEST_USER, no home, no login
#            shell), in group kvm when there is one (for /dev/kvm), unless it exists
#   image    build $GUEST_IMAGE_DIR/{vmlinuz,initrd.gz,disk.qcow2} unless it is there
#            already from the same recipe
#   dir      print the image directory
# Env: GUEST_IMAGE_DIR (/tmp/drover-guest), GUEST_USER (drover-guest: [cloud] guest_user)
#
# `drover serve` (as root) and `drover prepare-guests` run this very text, embedded in
# the binary after steps.sh (crates/control/src/guest_image.rs), as
# `bash -c '<steps.sh><this>' guest-image.sh packages image`: steps.sh is then defined
# already and not read from beside this file.
set -euo pipefail

GUEST_IMAGE_DIR=${GUEST_IMAGE_DIR:-/tmp/drover-guest}
GUEST_USER=${GUEST_USER:-drover-guest}
export DEBIAN_FRONTEND=noninteractive

declare -F run_steps >/dev/null || . "$(dirname "$0")/steps.sh"

kernel() { ls /boot/vmlinuz-*cloud* 2>/dev/null | sort -V | tail -1; }

do_install() {
  do_account
  do_packages
}

do_packages() {
  if command -v qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null \
    && command -v cpio >/dev/null && [ -n "$(kernel)" ] \
    && dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then
    return 0
  fi
  log "installing qemu, busybox-static and the cloud kernel"
  # A newer qemu-utils (backports) Breaks bookworm's qemu-system-common: pin qemu-utils to
  # the version of qemu-system-x86 that apt installs.
  apt_lists
  local version
  version=$(apt-cache policy qemu-system-x86 | awk '/Candidate/{print $2}')
  apt_install --no-install-recommends --allow-downgrades \
    qemu-system-x86 "qemu-utils=$version" busybox-static linux-image-cloud-amd64 cpio
  return 0
}

# The service (as root) runs each guest's QEMU as this account, never as root: a guest
# that escapes its emulator is this account, which owns nothing but the guests' disks.
do_account() {
  if ! id -u "$GUEST_USER" >/dev/null 2>&1; then
    log "making the guest account $GUEST_USER"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      "$GUEST_USER"
  fi
  if getent group kvm >/dev/null; then
    usermod -a -G kvm "$GUEST_USER"
  fi
  return 0
}

# The guest's /init and its agent. Changing either (or the modules) changes the recipe's
# stamp, so `image` rebuilds.
init_script() {
  cat <<'INIT'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /tmp
# The agent's port is virtio-serial: modules of the cloud kernel, loaded in order.
for module in /lib/modules/*.ko; do insmod "$module" 2>/dev/null; done
port=
for try in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  for dir in /sys/class/virtio-ports/vport*; do
    [ "$(cat "$dir/name" 2>/dev/null)" = org.drover.agent ] && port=/dev/${dir##*/}
  done
  [ -n "$port" ] && [ -e "$port" ] && break
  port=; usleep 100000
done
if [ -n "$port" ]; then
  /bin/drover-agent "$port" &
  echo "GUEST-AGENT $port"
else
  echo "GUEST-AGENT none: no virtio-serial port org.drover.agent"
fi
echo "GUEST-READY $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
# The agent runs in the background; this ticks until ACPI powers it down (busybox's init
# is not running, so the power button is handled by poweroff below).
while true; do
  sleep 1
  echo "GUEST-TICK $(cut -d' ' -f1 /proc/uptime)"
done
INIT
}

# The guest agent: reads requests from its port and answers each (protocol in the header).
agent_script() {
  cat <<'AGENT'
#!/bin/sh
# drover-agent PORT: runs the host's commands, one at a time.
LIMIT=1048576
work=/tmp/drover-agent
number() { case $1 in ''|*[!0-9]*) return 1;; esac; }
exec 3<>"$1"
while true; do
  # End of file: no host is connected to the port's socket; look again shortly.
  if ! read -r magic nonce slen elen ilen secs <&3; then usleep 200000; continue; fi
  [ "$magic" = DROVER-RUN ] || continue
  case $nonce in ''|*[!0-9a-f]*) continue;; esac
  number "$slen" && number "$elen" && number "$ilen" && number "$secs" || continue
  rm -rf "$work"; mkdir -p "$work"; cd "$work" || continue
  total=$((slen + elen + ilen))
  head -c "$total" <&3 > req
  # A short body: the host went away while sending; nobody waits for an answer.
  [ "$(wc -c < req)" -eq "$total" ] || continue
  head -c "$slen" req > script
  tail -c +$((slen + 1)) req | head -c "$elen" > env
  tail -c +$((slen + elen + 1)) req > stdin
  rm -f req
  mkfifo o e
  # Readers keep the first LIMIT + 1 bytes and drain the rest (so the command never
  # stops on a full pipe); each leads a session, to be killed if something the command
  # detached still holds the pipe open.
  setsid sh -c 'head -c "$1" > out; cat > /dev/null' reader $((LIMIT + 1)) < o &
  reader_out=$!
  setsid sh -c 'head -c "$1" > err; cat > /dev/null' reader $((LIMIT + 1)) < e &
  reader_err=$!
  # The command leads a session of its own, so that it and all it started can be killed.
  ( cd /; . "$work/env"; exec setsid sh -c "$(cat "$work/script")" ) < stdin > o 2> e &
  command=$!
  setsid sh -c 'sleep "$1"; touch "$2/timeout"; kill -KILL -"$3"' watchdog "$secs" "$work" "$command" &
  watchdog=$!
  wait "$command"
  code=$?
  # What the command left in its session goes with it. A helper is killed by pid and by
  # session: it may not have called setsid yet.
  kill -KILL -"$command" 2>/dev/null
  kill -KILL "$watchdog" 2>/dev/null; kill -KILL -"$watchdog" 2>/dev/null
  setsid sh -c 'sleep 2; kill -KILL -"$1" -"$2"' reaper "$reader_out" "$reader_err" &
  reaper=$!
  wait "$reader_out" "$reader_err" 2>/dev/null
  kill -KILL "$reaper" 2>/dev/null; kill -KILL -"$reaper" 2>/dev/null
  wait "$watchdog" "$reaper" 2>/dev/null
  timed_out=0; [ -e timeout ] && timed_out=1
  out_len=$(wc -c < out); out_cut=0
  [ "$out_len" -gt "$LIMIT" ] && { out_len=$LIMIT; out_cut=1; }
  err_len=$(wc -c < err); err_cut=0
  [ "$err_len" -gt "$LIMIT" ] && { err_len=$LIMIT; err_cut=1; }
  {
    echo "DROVER-DONE $nonce $code $timed_out $out_len $out_cut $err_len $err_cut"
    head -c "$out_len" out
    head -c "$err_len" err
    echo "DROVER-END $nonce"
  } >&3
  cd /; rm -rf "$work"
done
AGENT
}

# The modules the agent's port needs, in load order, unless the kernel has them built in.
AGENT_MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_console"

do_image() {
  local kernel_file stamp
  kernel_file=$(kernel)
  [ -n "$kernel_file" ] || { log "no /boot/vmlinuz-*cloud*: run the install step first"; exit 1; }
  [ -x /bin/busybox ] || { log "no /bin/busybox: run the install step first"; exit 1; }
  stamp=$( { init_script; agent_script; echo "$AGENT_MODULES"; echo "$kernel_file"
    sha256sum /bin/busybox "$kernel_file"; } | sha256sum | cut -d' ' -f1)
  if [ -f "$GUEST_IMAGE_DIR/vmlinuz" ] && [ -f "$GUEST_IMAGE_DIR/initrd.gz" ] \
    && [ -f "$GUEST_IMAGE_DIR/disk.qcow2" ] \
    && [ "$(cat "$GUEST_IMAGE_DIR/stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  local work
  mkdir -p "$GUEST_IMAGE_DIR"
  work=$(mktemp -d "$GUEST_IMAGE_DIR/.build.XXXXXX")
  mkdir -p "$work/root"/{bin,sbin,proc,sys,dev,tmp,etc,lib/modules}
  cp /bin/busybox "$work/root/bin/busybox"
  local applet
  for applet in sh mount echo cat cut uname poweroff sleep usleep ls insmod mkdir rm head \
    tail wc mkfifo setsid kill touch env; do
    ln -sf busybox "$work/root/bin/$applet"
  done
  init_script > "$work/root/init"
  agent_script > "$work/root/bin/drover-agent"
  chmod 0755 "$work/root/init" "$work/root/bin/drover-agent"
  copy_modules "$kernel_file" "$work/root/lib/modules"
  (cd "$work/root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 > "$work/initrd.gz")
  cp "$kernel_file" "$work/vmlinuz"
  # A small blank disk, so that images with a disk (a qcow2 overlay per guest) are tested too.
  qemu-img create -q -f qcow2 "$work/disk.qcow2" 16M
  chmod 0644 "$work/vmlinuz" "$work/initrd.gz" "$work/disk.qcow2"
  mv -f "$work/vmlinuz" "$work/initrd.gz" "$work/disk.qcow2" "$GUEST_IMAGE_DIR/"
  echo "$stamp" > "$GUEST_IMAGE_DIR/stamp"
  rm -rf "$work"
  log "image: $GUEST_IMAGE_DIR/{vmlinuz,initrd.gz,disk.qcow2}"
}

# Copies $AGENT_MODULES of the kernel's version into $2, named NN-<module>.ko so that
# /init's glob loads them in order; a module the kernel has built in is skipped.
copy_modules() {
  local version=${1##*/vmlinuz-} module file n=10
  for module in $AGENT_MODULES; do
    if grep -q "/$module.ko\$" "/lib/modules/$version/modules.builtin" 2>/dev/null; then
      continue
    fi
    file=$(find "/lib/modules/$version/kernel" -name "$module.ko" | head -1)
    [ -n "$file" ] || { log "no $module.ko for kernel $version (compressed modules are not handled)"; exit 1; }
    cp "$file" "$2/$n-$module.ko"
    n=$((n + 1))
  done
}

do_dir() { echo "$GUEST_IMAGE_DIR"; }

[ $# -gt 0 ] || set -- install image
run_steps "$@"
