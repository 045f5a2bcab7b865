// Loads each folder's config.yaml with Flink's own loader (GlobalConfiguration, the one a JobManager runs) and
// reads every key it holds through Flink's typed ConfigOption, as the cluster would. Prints one line per problem:
//   <folder> UNKNOWN <key>            no ConfigOption of Flink's distribution has this key (nor a deprecated one)
//   <folder> INVALID <key> <message>  the value does not parse as the option's type
//   <folder> LOADED <n>               the number of keys the loader read
// Usage: java -cp flink-dist.jar:flink-python.jar FlinkConfigCheck.java JAR... -- FOLDER...
// (tests/unit/test_flink_config.py runs it; the JARs are scanned for *Options classes.)
import java.io.File;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.FallbackKey;
import org.apache.flink.configuration.GlobalConfiguration;

public class FlinkConfigCheck {
    public static void main(String[] args) throws Exception {
        List<String> jars = new ArrayList<>();
        List<String> folders = new ArrayList<>();
        boolean afterSeparator = false;
        for (String arg : args) {
            if (arg.equals("--")) {
                afterSeparator = true;
            } else if (afterSeparator) {
                folders.add(arg);
            } else {
                jars.add(arg);
            }
        }
        Map<String, ConfigOption<?>> options = new HashMap<>();
        for (String jar : jars) {
            collect(jar, options);
        }
        System.out.println("OPTIONS " + options.size());
        for (String folder : folders) {
            Configuration config = GlobalConfiguration.loadConfiguration(folder);
            int loaded = 0;
            for (String key : config.keySet()) {
                loaded++;
                ConfigOption<?> option = options.get(key);
                if (option == null) {
                    System.out.println(folder + " UNKNOWN " + key);
                    continue;
                }
                try {
                    config.get(option);
                } catch (RuntimeException e) {
                    System.out.println(folder + " INVALID " + key + " " + e.getMessage().replace('\n', ' '));
                }
            }
            System.out.println(folder + " LOADED " + loaded);
        }
    }

    private static void collect(String jar, Map<String, ConfigOption<?>> options) throws Exception {
        ClassLoader loader = FlinkConfigCheck.class.getClassLoader();
        try (JarFile file = new JarFile(new File(jar))) {
            Enumeration<JarEntry> entries = file.entries();
            while (entries.hasMoreElements()) {
                String name = entries.nextElement().getName();
                if (!name.startsWith("org/apache/flink/") || name.contains("/shaded/") || name.contains("$")
                        || !name.endsWith("Options.class")) {
                    continue;
                }
                String className = name.substring(0, name.length() - ".class".length()).replace('/', '.');
                Class<?> type;
                try {
                    type = Class.forName(className, true, loader);
                } catch (Throwable e) {
                    continue; // a class whose dependencies are not on this class path holds no option we need
                }
                for (Field field : type.getDeclaredFields()) {
                    if (!Modifier.isStatic(field.getModifiers()) || !ConfigOption.class.isAssignableFrom(field.getType())) {
                        continue;
                    }
                    try {
                        field.setAccessible(true);
                        ConfigOption<?> option = (ConfigOption<?>) field.get(null);
                        options.put(option.key(), option);
                        for (FallbackKey fallback : option.fallbackKeys()) {
                            options.putIfAbsent(fallback.getKey(), option);
                        }
                    } catch (Throwable e) {
                        // not readable: skipped
                    }
                }
            }
        }
    }
}
