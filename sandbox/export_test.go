package sandbox

// For the tests of package sandbox_test (which can import testenv).
var (
	NSName     = nsName
	NewNamedNS = newNamedNS
	NetnsDir   = netnsDir
)
