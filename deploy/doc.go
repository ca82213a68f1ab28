// Package deploy holds no code: it is the home of the agent's deployment
// files (xdpdrop-agent.service for systemd, kubernetes/xdpdrop-agent.yaml
// for a DaemonSet), and its tests check the properties docs/AGENT.md
// promises of them: the exact capability set, no privileged container, the
// bpffs mount, the readiness probe on the agent's /healthz, and a config
// the agent accepts.
package deploy
