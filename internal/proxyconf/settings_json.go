package proxyconf

import "encoding/json"

// UnmarshalJSON reads settings as encoding/json writes them, and also as a version before several users did:
// with one user as "Auth" (name only, where backends kept it), read as the one entry of Users. The backends
// keep settings as JSON beside the proxy (gcp metadata, aws tags and parameters, a kubernetes annotation), so
// a proxy made by an earlier version must read back the user it has, not a removal nobody asked for.
func (s *Settings) UnmarshalJSON(b []byte) error {
	type plain Settings // without this method, so that decoding it does not recurse
	var v struct {
		plain
		Auth *BasicAuth
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Settings(v.plain)
	if len(s.Users) == 0 && v.Auth != nil {
		s.Users = []BasicAuth{*v.Auth}
	}
	return nil
}
