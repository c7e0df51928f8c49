#!/bin/sh
# `curl` in the locally made agnhost image: a stand-in over busybox wget (the upstream image has
# Alpine's curl; there is no static curl on this machine). It understands what the e2e specs
# pass: -g -q -s --silent -i -o FILE -w '%{http_code}' --connect-timeout N --max-time N
# --interface ADDR and one URL; anything else fails loudly with exit 2. Exit 7 when nothing
# answered, 0 when the server answered (any status, as curl without -f). wget cannot bind a source
# address, so with --interface the request is HTTP/1.0 through the image's nc (`nc -s ADDR`).
include=0 out= fmt= timeout= url= iface=
cr=$(printf '\r')
while [ $# -gt 0 ]; do
	case "$1" in
	-g | -q | -s | --silent | -sS | -L) ;;
	-i) include=1 ;;
	-o) out=$2; shift ;;
	-w) fmt=$2; shift ;;
	--connect-timeout | --max-time | -m) timeout=${2%s}; shift ;;
	--interface) iface=$2; shift ;;
	-*) echo "curl (wget stand-in): unsupported option $1" >&2; exit 2 ;;
	*) url=$1 ;;
	esac
	shift
done
case "$url" in http://* | https://*) ;; *) url="http://$url" ;; esac
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
if [ -n "$iface" ]; then
	rest=${url#*://}
	hostport=${rest%%/*}
	path=${rest#"$hostport"}
	path=${path:-/}
	case "$hostport" in
	\[*\]:*) host=${hostport%]:*}; host=${host#[}; port=${hostport##*]:} ;;
	\[*) host=${hostport%]}; host=${host#[}; port= ;;
	*:*) host=${hostport%:*}; port=${hostport##*:} ;;
	*) host=$hostport port= ;;
	esac
	wait=${timeout%.*}
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" |
		nc -s "$iface" -w "${wait:-30}" "$host" "${port:-80}" >"$tmp/raw" 2>"$tmp/err"
	status=$(head -n 1 "$tmp/raw" | sed -n 's/^HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p')
	[ -n "$status" ] || { cat "$tmp/err" >&2; exit 7; }
	[ "$include" = 1 ] && sed -n "1,/^$cr*\$/p" "$tmp/raw"
	sed "1,/^$cr*\$/d" "$tmp/raw" >"$tmp/body"
else
	# (busybox 1.35's `wget -T` crashes when static; `timeout` bounds the whole request instead)
	${timeout:+timeout "${timeout%.*}"} wget -S -q -O "$tmp/body" "$url" 2>"$tmp/err"
	status=$(sed -n 's/^ *HTTP\/[0-9.]* \([0-9][0-9][0-9]\).*/\1/p' "$tmp/err" | tail -n 1)
	[ -n "$status" ] || { cat "$tmp/err" >&2; exit 7; }
	if [ "$include" = 1 ]; then
		sed -n 's/^  //p' "$tmp/err" | sed 's/$/\r/'
		printf '\r\n'
	fi
fi
if [ -n "$out" ] && [ "$out" != - ]; then cp "$tmp/body" "$out" 2>/dev/null; else cat "$tmp/body" 2>/dev/null; fi
[ -z "$fmt" ] || printf '%s' "$fmt" | sed "s/%{http_code}/$status/g"
exit 0
