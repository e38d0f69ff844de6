"""The core of EMQ: the model, the seams, naming, settings, errors and the thread bridge.

It imports nothing else of ours (and no HTTP client, store client or Spark): every other
package builds on it.
"""
