package config

import (
	"fmt"
	"net"
	"strconv"
)

// MaxPeerID is the largest peer_id: 14 bits of a cancel key's process ID
// (proxy.MaxPeerID), PgBouncer's range.
const MaxPeerID = 16383

// DefaultPeerPort is a peer's port when its entry leaves it out:
// PgBouncer's listen_port, and DefaultListen's.
const DefaultPeerPort = 6432

// Peer is one entry of peers: another instance of the deployment, where a
// CancelRequest with a key it issued is forwarded in pool_mode
// transaction (PgBouncer's [peers]).
type Peer struct {
	// ID is the peer's own peer_id, 1 to MaxPeerID.
	ID int
	// Host and Port are where its clients connect to it; one instance,
	// never a load-balanced address.
	Host string
	Port int
}

// Addr is the peer's host:port.
func (p Peer) Addr() string { return net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) }

// parsePeers reads peer_id and peers. The list is the same in every
// instance, so it may hold an entry with peer_id itself, and peers needs
// no peer_id here: `serve --peer-id` may give it.
func parsePeers(f fields, cfg *Config) error {
	if v, ok := f["peer_id"]; ok {
		n, err := v.nonNegativeInt()
		if err != nil {
			return err
		}
		if n > MaxPeerID {
			return fmt.Errorf("%s: %d is larger than %d", v.path, n, MaxPeerID)
		}
		cfg.PeerID = n
	}
	v, ok := f["peers"]
	if !ok {
		return nil
	}
	items, err := v.list()
	if err != nil {
		return err
	}
	ids, addrs := map[int]string{}, map[string]string{}
	for _, item := range items {
		pf, err := mapping(item.val, item.path, "id", "host", "port")
		if err != nil {
			return err
		}
		for _, k := range []string{"id", "host"} {
			if !pf.has(k) {
				return fmt.Errorf("%s: required", join(item.path, k))
			}
		}
		p := Peer{Port: DefaultPeerPort}
		if p.ID, err = pf["id"].positiveInt(); err != nil {
			return err
		}
		if p.ID > MaxPeerID {
			return fmt.Errorf("%s: %d is larger than %d", pf["id"].path, p.ID, MaxPeerID)
		}
		if other, dup := ids[p.ID]; dup {
			return fmt.Errorf("%s: %d is %s's too", pf["id"].path, p.ID, other)
		}
		ids[p.ID] = item.path
		if p.Host, err = pf["host"].str(); err != nil {
			return err
		}
		if x, ok := pf["port"]; ok {
			if p.Port, err = x.positiveInt(); err != nil {
				return err
			}
			if p.Port > 65535 {
				return fmt.Errorf("%s: %d is not a port", x.path, p.Port)
			}
		}
		if other, dup := addrs[p.Addr()]; dup {
			return fmt.Errorf("%s: %s is %s's address too", item.path, p.Addr(), other)
		}
		addrs[p.Addr()] = item.path
		cfg.Peers = append(cfg.Peers, p)
	}
	return nil
}
