module triotypha.test/gotools

go 1.19

require github.com/golang/snappy v1.0.0
