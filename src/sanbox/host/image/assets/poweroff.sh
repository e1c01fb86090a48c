#!/bin/sh
# /sbin/sanbox-poweroff: clean shutdown. Ask every process to stop (SIGTERM) and give them time to
# (until none is left, at most GRACE), kill what is left, flush and remount the root disk
# read-only, then power off (QEMU runs with -no-reboot, so a reboot ends the VM process).
# Shell builtins only while waiting: a fork costs tens of milliseconds under TCG.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
GRACE=7 # seconds (6 to 7): longer than the services supervisor's own TERM-to-KILL (5 s)
trap '' TERM HUP INT

now() { # whole seconds since boot
  read -r up _ < /proc/uptime
  t=${up%.*}
}

left() { # is any process still there but PID 1 and its own `sleep 1`, this one, zombies and the
  # kernel's threads? (sanbox-init sleeps a second at a time once its children have ended)
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    if [ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = 2 ]; then continue; fi
    s=
    { read -r s < "$d/stat"; } 2>/dev/null || continue
    name=${s%%\) *}
    set -- ${s##*\) } # state, parent, group, session (the name may hold spaces and parentheses)
    if [ "$1" = Z ] || [ "$2" = 2 ]; then continue; fi # dead already; a kernel thread
    if [ "$2" = 1 ] && [ "$4" = 0 ] && [ "$name" = "$p (sleep" ]; then continue; fi
    return 0
  done
  return 1
}

kill -TERM -1 2>/dev/null
now
until=$((t + GRACE))
while left; do
  now
  [ "$t" -lt "$until" ] || break
  sleep 0.05
done
kill -KILL -1 2>/dev/null
sync
mount -o remount,ro / 2>/dev/null
sync
echo "SANBOX-POWEROFF" > /dev/ttyS0
exec python3 -c 'import ctypes; ctypes.CDLL(None, use_errno=True).reboot(0x01234567)'
