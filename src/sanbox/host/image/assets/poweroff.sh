#!/bin/sh
# /sbin/sanbox-poweroff: clean shutdown. Stop every process, flush and remount the root disk
# read-only, then power off (QEMU runs with -no-reboot, so a reboot ends the VM process).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
trap '' TERM HUP INT
kill -TERM -1 2>/dev/null
sleep 0.3
kill -KILL -1 2>/dev/null
sync
mount -o remount,ro / 2>/dev/null
sync
echo "SANBOX-POWEROFF" > /dev/ttyS0
exec python3 -c 'import ctypes; ctypes.CDLL(None, use_errno=True).reboot(0x01234567)'
