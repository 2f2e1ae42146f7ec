// Builds pause: the pod sandbox image of the local real node (a process that holds the pod's namespaces).
module accel.dev/localcluster/pause

go 1.26.0
