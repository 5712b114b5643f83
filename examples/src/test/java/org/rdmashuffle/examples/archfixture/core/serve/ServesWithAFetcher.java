package org.rdmashuffle.examples.archfixture.core.serve;

import org.rdmashuffle.examples.archfixture.core.directory.Peers;
import org.rdmashuffle.examples.archfixture.core.fetch.Fetcher;

/** ArchitectureTest's fixture: a serving class that names a fetch class, the arrow the core's rooms forbid. */
public final class ServesWithAFetcher {
    public int serve() {
        return new Fetcher().fetch(new Peers());
    }
}
