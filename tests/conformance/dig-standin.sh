#!/bin/sh
# `dig` in the locally made agnhost and glibc-dns-testing images: a stand-in over busybox
# nslookup (no static dig on this machine). The DNS specs only test that the answer section is
# non-empty (`check="$(dig +notcp +noall +answer +search NAME TYPE)" && test -n "$check"`), so
# it prints the answer lines nslookup found and nothing on NXDOMAIN or no answer. NOTE: +tcp
# queries go over UDP too (busybox nslookup has no TCP); the report says so.
type=a name=
while [ $# -gt 0 ]; do
	case "$1" in
	+*) ;;
	-x) name=$2; type=ptr; shift ;;
	A | AAAA | SRV | PTR | CNAME | TXT | MX | NS | SOA | a | aaaa | srv | ptr | cname | txt | mx | ns | soa) type=$1 ;;
	-*) echo "dig (nslookup stand-in): unsupported option $1" >&2; exit 2 ;;
	*) name=$1 ;;
	esac
	shift
done
[ -n "$name" ] || { echo "dig (nslookup stand-in): no name" >&2; exit 2; }
type=$(echo "$type" | tr 'A-Z' 'a-z')
# The first block of nslookup's output names the server; the answers follow the blank line.
nslookup -type="$type" "$name" 2>/dev/null | awk 'seen && /(Address|address|service|name =|canonical name|text =|mail exchanger)/ && !/NXDOMAIN|find/ { print } /^$/ { seen = 1 }'
exit 0
