// Command nc is the `nc` of the locally made agnhost image (the upstream image has
// netcat-openbsd; busybox's nc has no -v, -t or -u). It does what the e2e specs ask of it:
//
//	echo hostName | nc [-v] [-t|-u] [-w SECONDS] [-s SOURCE_ADDR] [-p SOURCE_PORT] [-z] HOST PORT
//
// connects over TCP (default) or UDP, copies stdin to the peer and the peer's answer to
// stdout until the peer closes or nothing arrives for -w seconds (then it exits 0 if it got an
// answer, as netcat-openbsd), and with -v says "Connection to HOST PORT port succeeded!" on
// stderr. A connection that fails exits 1 with the error on stderr.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

func main() {
	verbose := flag.Bool("v", false, "say when the connection succeeded")
	_ = flag.Bool("t", false, "TCP (the default)")
	udp := flag.Bool("u", false, "UDP instead of TCP")
	zero := flag.Bool("z", false, "only connect, send nothing")
	_ = flag.Bool("n", false, "numeric addresses only (accepted)")
	wait := flag.Int("w", 0, "connect and idle timeout in seconds")
	source := flag.Int("p", 0, "source port")
	address := flag.String("s", "", "source address")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: nc [-v] [-t|-u] [-z] [-w SECONDS] [-s ADDR] [-p PORT] HOST PORT")
		os.Exit(2)
	}
	host, port := flag.Arg(0), flag.Arg(1)
	network := "tcp"
	if *udp {
		network = "udp"
	}
	timeout := time.Duration(*wait) * time.Second
	dialer := net.Dialer{Timeout: timeout}
	if *source != 0 || *address != "" {
		ip := net.ParseIP(*address)
		if *address != "" && ip == nil {
			fmt.Fprintf(os.Stderr, "nc: -s %s: not an IP address\n", *address)
			os.Exit(2)
		}
		if *udp {
			dialer.LocalAddr = &net.UDPAddr{IP: ip, Port: *source}
		} else {
			dialer.LocalAddr = &net.TCPAddr{IP: ip, Port: *source}
		}
	}
	conn, err := dialer.Dial(network, net.JoinHostPort(host, port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nc: connect to %s port %s (%s) failed: %v\n", host, port, network, err)
		os.Exit(1)
	}
	defer conn.Close()
	if *verbose {
		fmt.Fprintf(os.Stderr, "Connection to %s %s port [%s/*] succeeded!\n", host, port, network)
	}
	if *zero {
		return
	}
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, os.Stdin)
		if tcp, ok := conn.(*net.TCPConn); ok && !*udp {
			_ = tcp.CloseWrite()
		}
		sent <- err
	}()
	got := 0
	buf := make([]byte, 64*1024)
	for {
		if timeout > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(timeout))
		}
		n, err := conn.Read(buf)
		if n > 0 {
			got += n
			_, _ = os.Stdout.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		var netErr net.Error
		if errors.Is(err, io.EOF) || (errors.As(err, &netErr) && netErr.Timeout()) {
			return
		}
		if got == 0 {
			fmt.Fprintf(os.Stderr, "nc: %v\n", err)
			os.Exit(1)
		}
		return
	}
}
