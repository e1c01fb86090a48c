#!/bin/sh
# /sbin/sanbox-init: PID 1 on the root disk. The initramfs has mounted /proc, /sys, /dev, /run
# and /tmp and set the hostname and the network (see initramfs-init.sh), so this starts the
# Sanbox agent at once (restarting it if it dies), then the supervisor of the template's services
# (sanbox_guest.services, in a restart loop of its own), grows the root filesystem and reaps orphans.
# No systemd.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# the agent: what the host waits for (restarted if it dies)
(
  while :; do
    PYTHONPATH=/opt/sanbox python3 -S -u -m sanbox_guest.agent > /dev/ttyS0 2>&1
    echo "SANBOX: agent exited ($?), restarting" > /dev/ttyS0
    sleep 0.2
  done
) &
# the template's services (/etc/sanbox/services.json): started in the idle scheduling class so that
# it does not slow the agent's start; it takes the normal class back when it has services to run
(
  while :; do
    PYTHONPATH=/opt/sanbox chrt --idle 0 python3 -S -u -m sanbox_guest.services > /dev/ttyS0 2>&1
    echo "SANBOX: services supervisor exited ($?), restarting" > /dev/ttyS0
    sleep 1
  done
) &
read -r up _ < /proc/uptime
echo "SANBOX-INIT $up" > /dev/ttyS0
# the disk may have been grown on the host: grow the filesystem to match (online)
resize2fs /dev/vda > /run/resize2fs.log 2>&1 &
trap '' TERM INT HUP
while :; do wait; sleep 1; done
