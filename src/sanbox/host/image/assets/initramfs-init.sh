#!/bin/busybox sh
# Sanbox initramfs: load the virtio modules, mount the root disk, prepare it (mounts, hostname,
# network from the sanbox.* kernel arguments), then switch_root into the disk's init, which only
# has to start the agent. Everything runs on static busybox, called directly: under emulation a
# dynamically linked program costs about 0.1 s per exec, an applet of this busybox a few ms.
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev
while read -r m; do  # in dependency order, as the image build wrote them
  $bb insmod "/lib/modules/$m.ko" 2>/dev/null
done < /lib/modules/load
root=/dev/vda; rootfstype=ext4; rootflags=rw; init=/sbin/sanbox-init
host=sanbox; ip=; gw=; dns=
for a in $($bb cat /proc/cmdline); do
  case $a in
    root=*) root=${a#root=};; rootfstype=*) rootfstype=${a#rootfstype=};;
    rootflags=*) rootflags=${a#rootflags=};; init=*) init=${a#init=};;
    sanbox.hostname=*) host=${a#sanbox.hostname=};; sanbox.ip=*) ip=${a#sanbox.ip=};;
    sanbox.gw=*) gw=${a#sanbox.gw=};; sanbox.dns=*) dns=${a#sanbox.dns=};;
    sanbox.probe) echo "SANBOX-PROBE-OK"; $bb sync; $bb poweroff -f;;
    rdshell) $bb --install -s /bin; exec $bb sh;;
  esac
done
i=0; while [ ! -b "$root" ] && [ $i -lt 500 ]; do $bb usleep 10000; i=$((i+1)); done
$bb mount -t "$rootfstype" -o "$rootflags" "$root" /newroot || { echo "SANBOX: cannot mount $root"; $bb poweroff -f; }
r=/newroot
# the root disk's mounts: these move with it through switch_root
$bb mount --move /proc $r/proc
$bb mount --move /sys $r/sys
$bb mount --move /dev $r/dev
$bb mount -t tmpfs -o mode=755,nosuid,nodev tmpfs $r/run
$bb mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $r/tmp
$bb mkdir -p $r/dev/pts $r/dev/shm
$bb mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $r/dev/pts
$bb mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
$bb mount -t cgroup2 cgroup2 $r/sys/fs/cgroup 2>/dev/null
# hostname and network: in place before the agent starts, so every command sees them
$bb hostname "$host"
echo "$host" > $r/etc/hostname
$bb printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$host" > $r/etc/hosts
$bb ip link set lo up
if [ -n "$ip" ] && [ -e $r/sys/class/net/eth0 ]; then
  $bb ip link set eth0 up
  $bb ip addr add "$ip" dev eth0
  [ -n "$gw" ] && $bb ip route add default via "$gw"
fi
[ -n "$dns" ] && echo "nameserver $dns" > $r/etc/resolv.conf
[ -s $r/etc/machine-id ] || $bb tr -d - < $r/proc/sys/kernel/random/uuid > $r/etc/machine-id
# IPv6 is off in the guest (the kernel command line says so too)
[ -d $r/proc/sys/net/ipv6 ] && echo 1 > $r/proc/sys/net/ipv6/conf/all/disable_ipv6
exec $bb switch_root $r "$init"
