"""embodia.shared: one implementation of each job that several floors of the house do, in a leaf that
imports only the standard library, numpy and third-party packages (never another embodia module),
so the memory, the policies and the runtime may all import it.

- `embodia.shared.images`: PNG (and JPEG) encoding and decoding: screenshots, recorded frames, data URLs.
- `embodia.shared.files`: atomic, durable writes of files and folders.
- `embodia.shared.bounded_http`: an HTTP POST with one deadline for the whole exchange and a size cap.
- `embodia.shared.noise`: the Gaussian draw a flow sampler starts from.
"""
