package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// account is a user the cluster's programs run as instead of this
// process's own; a nil *account means this process's user.
type account struct{ uid, gid int }

// programAccount returns the account to run program (initdb, postgres,
// pgbouncer) as: nil unless this process is root, which PostgreSQL and
// PgBouncer refuse to run as; then the "postgres" user.
func programAccount(program string) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and there is no 'postgres' user to run %s as (run .ci/install-postgres.sh): %w", program, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	return &account{uid: uid, gid: gid}, nil
}

// chown gives path to a; it does nothing for a nil a.
func (a *account) chown(path string) error {
	if a == nil {
		return nil
	}
	return os.Chown(path, a.uid, a.gid)
}
