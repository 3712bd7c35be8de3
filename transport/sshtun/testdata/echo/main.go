// Command echo is the one program in the image the end-to-end tests run on
// sandbox nodes. With -listen it serves TCP and writes back every byte it
// reads (a node-local port to dial through the tunnel); with -print it
// prints its arguments and exits (a container that runs to completion).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
)

func main() {
	listen := flag.String("listen", "", "address to serve TCP echo on")
	print := flag.Bool("print", false, "print the arguments and exit")
	flag.Parse()
	if *print {
		fmt.Println(strings.Join(flag.Args(), " "))
		return
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
