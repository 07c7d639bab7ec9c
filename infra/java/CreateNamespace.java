// Creates an HBase namespace if it does not exist. HBase's Thrift1 API (what happybase speaks)
// has no namespace calls, so lambdactl runs this once with the HBase jars on the classpath:
//   java -cp '<hbase conf>:<hbase jars>/*' CreateNamespace.java <namespace>
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.NamespaceDescriptor;
import org.apache.hadoop.hbase.NamespaceExistException;
import org.apache.hadoop.hbase.client.Admin;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;

public class CreateNamespace {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: CreateNamespace <namespace>");
            System.exit(2);
        }
        Configuration conf = HBaseConfiguration.create();
        try (Connection connection = ConnectionFactory.createConnection(conf);
             Admin admin = connection.getAdmin()) {
            try {
                admin.createNamespace(NamespaceDescriptor.create(args[0]).build());
                System.out.println("created namespace " + args[0]);
            } catch (NamespaceExistException e) {
                System.out.println("namespace " + args[0] + " exists");
            }
        }
    }
}
