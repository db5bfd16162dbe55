package cli

import "runtime/debug"

// Version is the retryq version recorded in the node registry. Left at
// "dev" (not set at link time with -X), the server records the version
// the Go toolchain stamped into the binary instead; see nodeVersion.
var Version = "dev"

// nodeVersion returns the version a node records in the registry: linked
// when set at link time (anything but "dev"); else the main module's
// version from the build info (go install ...@v1.4.0, or the
// pseudo-version of a build in a checkout); else "dev" followed by the VCS
// revision the binary was built at, with "-dirty" when the checkout had
// changes; else "dev".
func nodeVersion(linked string, info *debug.BuildInfo) string {
	if linked != "dev" || info == nil {
		return linked
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return linked
	}
	v := "dev-" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return v
}

// buildVersion is nodeVersion of Version and this binary's build info.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return nodeVersion(Version, info)
}
