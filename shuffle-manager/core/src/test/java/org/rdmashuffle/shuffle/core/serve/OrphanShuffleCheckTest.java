package org.rdmashuffle.shuffle.core.serve;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.shuffle.core.directory.NoPeerDirectory;

/** The orphan check drops only what it asked about and the directory no longer knows, counting missed cleanups. */
class OrphanShuffleCheckTest {
    /** A directory that knows every shuffle but {@code gone}, and fails when {@code unreachable}. */
    private static final class FakeDirectory extends NoPeerDirectory {
        int[] gone = new int[0];
        boolean unreachable;

        @Override
        public int[] goneShuffles(int[] held) throws Exception {
            if (unreachable) {
                throw new Exception("driver unreachable");
            }
            return gone;
        }
    }

    @Test
    void shouldDropOnlyAskedShufflesWhenTheDirectoryNoLongerKnowsThem() {
        FakeDirectory directory = new FakeDirectory();
        directory.gone = new int[] {2, 5, 9}; // 9 was not asked about: kept
        List<Integer> dropped = new ArrayList<>();
        OrphanShuffleCheck check = new OrphanShuffleCheck("1", directory, held -> held.addAll(List.of(5, 2, 3)),
                id -> id == 5, dropped::add);
        assertArrayEquals(new int[] {2, 3, 5}, check.heldShuffles());
        check.run();
        assertEquals(List.of(2, 5), dropped);
        assertEquals(1, check.dropped()); // 5's cleanup arrived here: it goes quietly
    }

    @Test
    void shouldDropNothingWhenTheDirectoryCannotBeAsked() {
        FakeDirectory directory = new FakeDirectory();
        directory.gone = new int[] {1};
        directory.unreachable = true;
        List<Integer> dropped = new ArrayList<>();
        OrphanShuffleCheck check = new OrphanShuffleCheck("1", directory, held -> held.add(1), id -> false,
                dropped::add);
        check.run();
        assertEquals(List.of(), dropped);
        assertEquals(0, check.dropped());
    }
}
