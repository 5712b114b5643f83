package org.rdmashuffle.mapreduce;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.log4j.AppenderSkeleton;
import org.apache.log4j.Level;
import org.apache.log4j.Logger;
import org.apache.log4j.spi.LoggingEvent;

/**
 * What a log4j logger (and the loggers below it) logs at WARN or above while this is open: a test opens it in a
 * try-with-resources, and closing it takes its appender off the logger again.
 */
final class LoggedWarnings implements AutoCloseable {
    private final Logger logger;
    private final List<String> warnings = new CopyOnWriteArrayList<>();
    private final List<String> lines = new CopyOnWriteArrayList<>();
    private final AppenderSkeleton appender = new AppenderSkeleton() {
        @Override
        protected void append(LoggingEvent e) {
            if (e.getLevel() == Level.WARN) {
                warnings.add(e.getRenderedMessage());
            }
            if (e.getLevel().isGreaterOrEqual(Level.WARN)) {
                lines.add(e.getLoggerName() + ": " + e.getRenderedMessage());
            }
        }

        @Override
        public void close() {
        }

        @Override
        public boolean requiresLayout() {
            return false;
        }
    };

    private LoggedWarnings(Logger logger) {
        this.logger = logger;
        logger.addAppender(appender);
    }

    /** Starts capturing what the logger of {@code logger} logs. */
    static LoggedWarnings of(Class<?> logger) {
        return new LoggedWarnings(Logger.getLogger(logger));
    }

    /** Starts capturing what the logger named {@code loggerName} and those below it log. */
    static LoggedWarnings of(String loggerName) {
        return new LoggedWarnings(Logger.getLogger(loggerName));
    }

    /** The messages logged at WARN, in order (live: later ones show up). */
    List<String> messages() {
        return warnings;
    }

    /** Every event at WARN or above (ERROR, FATAL) as "logger: message", in order (live). */
    List<String> lines() {
        return lines;
    }

    @Override
    public void close() {
        logger.removeAppender(appender);
    }
}
