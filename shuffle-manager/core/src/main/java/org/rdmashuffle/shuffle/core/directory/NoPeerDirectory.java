package org.rdmashuffle.shuffle.core.directory;

import java.util.List;
import org.rdmashuffle.transport.NodeAddress;

/**
 * A directory that knows nobody: for a server whose readers find its node by a fixed address (a MapReduce
 * NodeManager's service on its configured port), so there is nothing to announce, and nothing is known removed or
 * gone. Subclasses may answer one question differently (tests).
 */
public class NoPeerDirectory implements PeerDirectory {
    @Override
    public void register(String peerId, NodeAddress address, long incarnation) {
    }

    @Override
    public Found find(String peerId) {
        return Found.NONE;
    }

    @Override
    public Found recheck(String peerId) {
        return Found.NONE;
    }

    @Override
    public boolean knownRemoved(String peerId) {
        return false;
    }

    @Override
    public boolean removed(String peerId) {
        return false;
    }

    @Override
    public List<NodeAddress> refreshRemoved() {
        return List.of();
    }

    @Override
    public void invalidate(String peerId) {
    }

    @Override
    public void forget(String peerId) {
    }

    @Override
    public int[] goneShuffles(int[] held) throws Exception {
        return new int[0];
    }
}
