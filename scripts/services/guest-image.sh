#!/usr/bin/env bash
# The default guest image for the QEMU provisioner and its tests, from Debian bookworm
# packages only (no download of an image): the kernel of linux-image-cloud-amd64 and an
# initramfs of busybox-static whose /init prints `GUEST-READY <kernel> <uptime>` on the
# serial console, then `GUEST-TICK <uptime>` every second (so a test can see that a
# migrated guest did not reboot), until it is powered down.
#
# Usage (as root):  scripts/services/guest-image.sh [install|image|dir]...   (default: install image)
#   install  apt-get install qemu-system-x86, qemu-utils (pinned to qemu-system-x86's
#            version), busybox-static, linux-image-cloud-amd64, cpio, if any is missing
#   image    build $GUEST_IMAGE_DIR/{vmlinuz,initrd.gz,disk.qcow2} unless it is there
#            already from the same recipe
#   dir      print the image directory
# Env: GUEST_IMAGE_DIR (/tmp/drover-guest)
set -euo pipefail

GUEST_IMAGE_DIR=${GUEST_IMAGE_DIR:-/tmp/drover-guest}
export DEBIAN_FRONTEND=noninteractive

. "$(dirname "$0")/steps.sh"

kernel() { ls /boot/vmlinuz-*cloud* 2>/dev/null | sort -V | tail -1; }

do_install() {
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

# The guest's /init. Changing it changes the recipe's stamp, so `image` rebuilds.
init_script() {
  cat <<'INIT'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
echo "GUEST-READY $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
# A real guest would start its agent here; this one ticks until ACPI powers it down
# (busybox's init is not running, so the power button is handled by poweroff below).
while true; do
  sleep 1
  echo "GUEST-TICK $(cut -d' ' -f1 /proc/uptime)"
done
INIT
}

do_image() {
  local kernel_file stamp
  kernel_file=$(kernel)
  [ -n "$kernel_file" ] || { log "no /boot/vmlinuz-*cloud*: run the install step first"; exit 1; }
  [ -x /bin/busybox ] || { log "no /bin/busybox: run the install step first"; exit 1; }
  stamp=$( { init_script; echo "$kernel_file"; sha256sum /bin/busybox "$kernel_file"; } | sha256sum | cut -d' ' -f1)
  if [ -f "$GUEST_IMAGE_DIR/vmlinuz" ] && [ -f "$GUEST_IMAGE_DIR/initrd.gz" ] \
    && [ -f "$GUEST_IMAGE_DIR/disk.qcow2" ] \
    && [ "$(cat "$GUEST_IMAGE_DIR/stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  local work
  mkdir -p "$GUEST_IMAGE_DIR"
  work=$(mktemp -d "$GUEST_IMAGE_DIR/.build.XXXXXX")
  mkdir -p "$work/root"/{bin,sbin,proc,sys,dev,tmp,etc}
  cp /bin/busybox "$work/root/bin/busybox"
  local applet
  for applet in sh mount echo cat cut uname poweroff sleep ls; do ln -sf busybox "$work/root/bin/$applet"; done
  init_script > "$work/root/init"
  chmod 0755 "$work/root/init"
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

do_dir() { echo "$GUEST_IMAGE_DIR"; }

[ $# -gt 0 ] || set -- install image
run_steps "$@"
