package event

// LocalTenant is the tenant of everything the command line does on this
// host's own behalf: the runs of airlock run, the policies and credits its
// commands name without a tenant, the secrets of airlock secrets, the
// egress records of airlock sandbox run, and the run tenant policy explain
// assumes. It is defined here, the lowest package its users share, so that
// there is one name: a serve tenant of that name is the command line's.
const LocalTenant = "local"
