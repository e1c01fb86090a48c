#!/bin/sh
# /sbin/sanbox-init: PID 1 on the root disk. Mounts, sets the hostname and the network from the
# kernel command line, starts the Sanbox agent (restarting it if it dies), grows the root
# filesystem and reaps orphans. No systemd. Everything a command run through the agent may see
# (mounts, hostname, network) is in place before the agent starts.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
HOST=sanbox; IP=; GW=; DNS=
for a in $(cat /proc/cmdline); do case $a in
  sanbox.hostname=*) HOST=${a#sanbox.hostname=};; sanbox.ip=*) IP=${a#sanbox.ip=};;
  sanbox.gw=*) GW=${a#sanbox.gw=};; sanbox.dns=*) DNS=${a#sanbox.dns=};; esac; done
hostname "$HOST"; echo "$HOST" > /etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$HOST" > /etc/hosts
ip link set lo up
if [ -n "$IP" ] && [ -e /sys/class/net/eth0 ]; then
  ip link set eth0 up; ip addr add "$IP" dev eth0
  [ -n "$GW" ] && ip route add default via "$GW"
fi
[ -n "$DNS" ] && echo "nameserver $DNS" > /etc/resolv.conf
# the agent: what the host waits for (restarted if it dies)
(
  while :; do
    PYTHONPATH=/opt/sanbox python3 -S -u -m sanbox_guest.agent > /dev/ttyS0 2>&1
    echo "SANBOX: agent exited ($?), restarting" > /dev/ttyS0
    sleep 0.2
  done
) &
echo "SANBOX-INIT $(cut -d' ' -f1 /proc/uptime)" > /dev/ttyS0
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id
# IPv6 is off in the guest (the kernel command line says so too)
[ -d /proc/sys/net/ipv6 ] && echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
# the disk may have been grown on the host: grow the filesystem to match (online)
resize2fs /dev/vda > /run/resize2fs.log 2>&1 &
trap '' TERM INT HUP
while :; do wait; sleep 1; done
