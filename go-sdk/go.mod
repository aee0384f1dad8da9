module iar.dev/sdk

go 1.24
