module windvane/tests/clients/logfmt

go 1.21

require github.com/go-logfmt/logfmt v0.6.1
