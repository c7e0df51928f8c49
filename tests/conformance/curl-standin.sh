#!/bin/sh
# `curl` in the locally made agnhost image: a stand-in over busybox wget (the upstream image has
# Alpine's curl; there is no static curl on this machine). It understands what the e2e specs
# pass: -g -q -s --silent -i -o FILE -w '%{http_code}' --connect-timeout N --max-time N and one
# URL; anything else (e.g. --interface) fails loudly with exit 2. Exit 7 when nothing answered,
# 0 when the server answered (any status, as curl without -f).
include=0 out= fmt= timeout= url=
while [ $# -gt 0 ]; do
	case "$1" in
	-g | -q | -s | --silent | -sS | -L) ;;
	-i) include=1 ;;
	-o) out=$2; shift ;;
	-w) fmt=$2; shift ;;
	--connect-timeout | --max-time | -m) timeout=${2%s}; shift ;;
	-*) echo "curl (wget stand-in): unsupported option $1" >&2; exit 2 ;;
	*) url=$1 ;;
	esac
	shift
done
case "$url" in http://* | https://*) ;; *) url="http://$url" ;; esac
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
# (busybox 1.35's `wget -T` crashes when static; `timeout` bounds the whole request instead)
${timeout:+timeout "${timeout%.*}"} wget -S -q -O "$tmp/body" "$url" 2>"$tmp/err"
status=$(sed -n 's/^ *HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' "$tmp/err" | tail -n 1)
[ -n "$status" ] || { cat "$tmp/err" >&2; exit 7; }
if [ "$include" = 1 ]; then
	sed -n 's/^  //p' "$tmp/err" | sed 's/$/\r/'
	printf '\r\n'
fi
if [ -n "$out" ] && [ "$out" != - ]; then cp "$tmp/body" "$out" 2>/dev/null; else cat "$tmp/body" 2>/dev/null; fi
[ -z "$fmt" ] || printf '%s' "$fmt" | sed "s/%{http_code}/$status/g"
exit 0
