//go:build tools

// Package tools pins Shopify's toxiproxy (its server; the tests drive its HTTP API), which the fault
// campaign puts between iar and the S3 store and the API server to inject
// latency, resets and partitions at the TCP level.
package tools

import _ "github.com/Shopify/toxiproxy/v2/cmd/server"
