package org.rdmashuffle.shuffle;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.Configuration;
import org.apache.logging.log4j.core.config.LoggerConfig;
import org.apache.logging.log4j.core.config.Property;

/**
 * The lines one logger of this JVM (the driver's, in a local cluster) logs at INFO and above while open: an
 * appender of Log4j 2, Spark's logging back end, added after Spark configured its logging (which would otherwise
 * replace it) and removed on close.
 */
final class DriverLogLines implements AutoCloseable {
    private final String loggerName;
    private final List<String> lines = new CopyOnWriteArrayList<>();
    private final AbstractAppender appender;

    DriverLogLines(Class<?> logger) {
        org.apache.spark.SparkContext$.MODULE$.initializeLogIfNecessary(false); // Spark's own set-up first
        this.loggerName = logger.getName();
        this.appender = new AbstractAppender("test-" + loggerName, null, null, true, Property.EMPTY_ARRAY) {
            @Override
            public void append(LogEvent event) {
                lines.add(event.getLevel() + " " + event.getMessage().getFormattedMessage());
            }
        };
        appender.start();
        LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
        Configuration config = ctx.getConfiguration();
        LoggerConfig lc = new LoggerConfig(loggerName, Level.INFO, true);
        lc.addAppender(appender, Level.INFO, null);
        config.addLogger(loggerName, lc);
        ctx.updateLoggers();
    }

    /** The lines logged so far, each as {@code LEVEL message}. */
    List<String> lines() {
        return List.copyOf(lines);
    }

    @Override
    public void close() {
        LoggerContext ctx = (LoggerContext) LogManager.getContext(false);
        ctx.getConfiguration().removeLogger(loggerName);
        ctx.updateLoggers();
        appender.stop();
    }
}
