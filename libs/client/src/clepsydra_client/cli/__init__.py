"""The ``clepsydra`` command (:func:`clepsydra_client.cli.main.main`): the argument parser, the
sub-commands over the SDK and the text they print. The SDK never imports this package."""
