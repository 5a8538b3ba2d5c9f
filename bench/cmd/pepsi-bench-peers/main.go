// Command pepsi-bench-peers measures pepsi beside River on the same server
// ("make bench-peers"); see README.md beside this file and package
// bench/internal/peers.
package main

import (
	"os"

	"github.com/pepsi-dev/pepsi/bench/internal/peers"
)

func main() { os.Exit(peers.Main(os.Args[1:])) }
