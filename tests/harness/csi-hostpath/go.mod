// The test harness's stand-in for the hostpath CSI driver, node-driver-registrar and
// livenessprobe (see README.md). Built by tests/harness/csi_build.py.
module nodeagent.test/csi-hostpath

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	golang.org/x/sys v0.45.0
	google.golang.org/grpc v1.81.1
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/apimachinery v0.36.3
	k8s.io/kubelet v0.36.3
)

require (
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/text v0.37.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
)
