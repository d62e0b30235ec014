"""Tools for job authors: will this job be enrolled, will its logs arm the detectors?"""
