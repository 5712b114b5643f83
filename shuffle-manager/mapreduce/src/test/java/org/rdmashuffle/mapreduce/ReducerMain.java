package org.rdmashuffle.mapreduce;

import java.io.InputStream;
import java.util.Base64;
import org.apache.hadoop.conf.Configuration;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.transport.NodeAddress;

/**
 * A reducer in a JVM of its own (tests kill it): REGISTERs map 0 attempt 0 with the service at 127.0.0.1 and READs
 * one partition of it again and again, printing {@code read <round> <bytes>} after each, until killed.
 *
 * <p>Arguments: port, job id, the job's secret (base64), maps, reduces, the partition.
 */
final class ReducerMain {
    private ReducerMain() {
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String job = args[1];
        byte[] secret = Base64.getDecoder().decode(args[2]);
        int maps = Integer.parseInt(args[3]);
        int reduces = Integer.parseInt(args[4]);
        int reduce = Integer.parseInt(args[5]);
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        c.set(MapReduceRdmaConf.PREFIX + "bindHost", "127.0.0.1");
        try (ReducerClient client = new ReducerClient(MapReduceRdmaConf.from(c), job, secret)) {
            NodeAddress at = new NodeAddress("127.0.0.1", port, "tcp");
            RegisterProtocol.Reply reply = RunningService.register(client, at, maps, reduces, reduce,
                    new MapAttempt(0, 0));
            if (reply.status() != RegisterProtocol.OK || reply.maps()[0].state() != RegisterProtocol.PUBLISHED) {
                System.out.println("refused " + reply.reason());
                System.exit(2);
            }
            byte[] chunk = new byte[1 << 16];
            for (long round = 0; ; round++) {
                long bytes = 0;
                try (BlockFetcher f = client.newFetcher(1)) {
                    f.add(new Request(at, reply.table(), 0, 0, reduce, reduce + 1));
                    try (Block b = f.next(); InputStream in = b.open(0, b.length())) {
                        for (int n; (n = in.read(chunk)) > 0; ) {
                            bytes += n;
                        }
                    }
                }
                System.out.println("read " + round + " " + bytes);
                System.out.flush();
            }
        }
    }
}
