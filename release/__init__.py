"""The release: build and publish the wheels, the sdist, the image and the chart; rehearse it on loopback."""
