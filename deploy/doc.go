// Package deploy holds the monitoring and deployment kit (a Grafana
// dashboard, Prometheus alert rules with their unit tests, a
// docker-compose file, a systemd unit and Kubernetes manifests); its tests
// validate the kit against the metrics the code registers and the
// configuration format. It has no Go code of its own. The compose file is
// checked by deploy/compose, a module of its own (see there).
package deploy
