"""The Pulumi program: read this stack's environment and build its components."""

from components.program import deploy

deploy()
