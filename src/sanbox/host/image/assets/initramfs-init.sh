#!/bin/busybox sh
# Sanbox initramfs: load the virtio modules, then switch_root into the root disk.
# Applets are called through busybox directly: installing their links costs time at every boot.
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_mmio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
         virtio_blk failover net_failover virtio_net virtio_console virtio-rng \
         vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport; do
  [ -f /lib/modules/$m.ko ] && $bb insmod /lib/modules/$m.ko 2>/dev/null
done
root=/dev/vda; rootfstype=ext4; rootflags=rw; init=/sbin/sanbox-init
for a in $($bb cat /proc/cmdline); do
  case $a in
    root=*) root=${a#root=};; rootfstype=*) rootfstype=${a#rootfstype=};;
    rootflags=*) rootflags=${a#rootflags=};; init=*) init=${a#init=};;
    sanbox.probe) echo "SANBOX-PROBE-OK"; $bb sync; $bb poweroff -f;;
    rdshell) $bb --install -s /bin; exec $bb sh;;
  esac
done
i=0; while [ ! -b "$root" ] && [ $i -lt 500 ]; do $bb usleep 10000; i=$((i+1)); done
$bb mount -t "$rootfstype" -o "$rootflags" "$root" /newroot || { echo "SANBOX: cannot mount $root"; $bb poweroff -f; }
$bb umount /sys /proc
$bb mount --move /dev /newroot/dev
exec $bb switch_root /newroot "$init"
