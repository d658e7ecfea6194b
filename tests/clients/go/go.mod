module windvane/tests/clients/go

go 1.19

require github.com/fluent/fluent-logger-golang v1.9.0

require (
	github.com/bmizerany/assert v0.0.0-20160611221934-b7ed37b82869 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/philhofer/fwd v1.1.1 // indirect
	github.com/tinylib/msgp v1.1.6 // indirect
)
