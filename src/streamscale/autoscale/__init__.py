"""The autoscaler: pure policies, a cluster simulator with traces, and (elsewhere) the driver's
controller and actuator."""
