module portico.dev/portico/hack/echobin

go 1.26.0

// The conformance module points at "../" for the API types; outside its
// repository that has to be the released module of the same version.
replace sigs.k8s.io/gateway-api => sigs.k8s.io/gateway-api v1.6.3

require sigs.k8s.io/gateway-api/conformance v1.6.3

require (
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.37.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260427160629-7cedc36a6bc4 // indirect
	google.golang.org/grpc v1.81.1 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
