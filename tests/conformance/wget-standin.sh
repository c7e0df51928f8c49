#!/bin/sh
# `wget` in the locally made agnhost image: busybox wget without its -T, which crashes Debian's
# static busybox 1.35 (SIGSEGV; the e2e specs' `wget -q -O - -T 1` check of a Service's backends
# never saw an answer). `timeout` bounds the whole request instead.
t= skip=0
for a do
	shift
	if [ "$skip" = 1 ]; then t=$a; skip=0; continue; fi
	case "$a" in
	-T) skip=1; continue ;;
	-T*) t=${a#-T}; continue ;;
	esac
	set -- "$@" "$a"
done
if [ -n "$t" ]; then exec timeout "${t%.*}" busybox wget "$@"; fi
exec busybox wget "$@"
